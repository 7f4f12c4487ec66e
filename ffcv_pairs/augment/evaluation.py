"""The evaluation twin of a training augmentation: the same output, nothing random."""

from __future__ import annotations

from .config import PairAugment

__all__ = ["eval_pipeline", "random_ops"]


def eval_pipeline(augment: PairAugment | None) -> PairAugment | None:
    """The deterministic twin of a training ``augment``: its ``crop`` or ``resized_crop``
    taken from the centre (the same output size), its ``resize``, ``resize_longest`` and
    ``pad_if_needed``, its normalisation, output dtype and dense fields, its user ops that draw
    nothing (fixed transforms, as normalisation is), and nothing random; None when that leaves
    nothing to do."""
    if augment is None:
        return None
    plain = augment.out_size is not None and not augment.resizes
    twin = PairAugment(
        crop=augment.crop if plain else None,
        crop_padding=augment.crop_padding if plain else 0,
        resized_crop=augment.resized_crop,
        center=augment.out_size is not None,
        resize=augment.resize,
        resize_longest=augment.resize_longest,
        pad_if_needed=augment.pad_if_needed,
        pad_mode=augment.pad_mode,
        fill=augment.fill,
        normalize_mean=augment.normalize_mean,
        normalize_std=augment.normalize_std,
        out_dtype=augment.out_dtype,
        channels=augment.channels,
        dense=augment.dense,
        user_ops=tuple(op for op in augment.user_ops if not op.draws),
    )
    converts = twin.normalize_mean is not None or twin.out_dtype is not None
    return twin if twin.has_geometry or converts or twin.user_ops else None


def random_ops(augment: PairAugment) -> list[str]:
    """The options of ``augment`` that draw at random (a crop or resized crop unless
    ``center``; a user op that draws), as ``name=value``; empty for a deterministic
    pipeline."""
    drawn: list[tuple[str, object]] = [
        ("hflip", augment.hflip),
        ("vflip", augment.vflip),
        ("rot90", augment.rot90),
        ("translate", augment.translate if any(augment.translate) else 0),
        ("brightness", augment.brightness),
        ("contrast", augment.contrast),
        ("noise_std", augment.noise_std),
        ("swap", augment.swap),
    ]
    if not augment.center:
        drawn += [("crop", augment.crop), ("resized_crop", augment.resized_crop)]
    drawn += [(name, getattr(augment, name)) for name in augment.photo_ops + augment.policy_ops]
    fixed = ("resize", "resize_longest", "pad_if_needed")
    drawn += [(name, getattr(augment, name)) for name in augment.warp_ops if name not in fixed]
    drawn += [(f"user op {op.name!r} draws", op.draws) for op in augment.user_ops]
    return [f"{name}={value}" for name, value in drawn if value]
