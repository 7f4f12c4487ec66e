"""2 simulated nodes x 2 ranks read one dataset from moto's S3 on 127.0.0.1, as ffcv-pairs,
Mosaic Streaming and LitData, each with its own remote reader and node cache.

Part of ``python -m bench --remote`` (:mod:`bench.tables.remote_sim` is the other part)::

    .venv/bin/python -m bench --remote live             # this run alone (a few minutes)
    .venv/bin/python -m bench --remote live --smoke     # 4,000 pairs, one round

What runs: seeded pairs are written as ffcv-pairs shards (a manifest), as Mosaic's MDS
shards and as LitData chunks of about the same size (each by its own writer; the peers in
``bench/.work/venv-remote``, :mod:`bench.extras.remote_peers`), and uploaded to one moto
S3 server. Each node has its own endpoint on the server (two ports, one backend), so the
bytes each node fetches are counted as the server sends them (GET bodies). A node is a
mount namespace (``unshare -m``) with its own ``/dev/shm`` and ``TMPDIR``, as on two
machines: Mosaic's node state lives in shared memory named per machine. Its two ranks
are processes with the environment each library reads (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``; LitData's ``GLOBAL_RANK`` and ``NNODES``; Mosaic joins
a gloo group of the 4 ranks, as it does under torchrun). Every rank reads ``epochs`` epochs,
shuffled, batch ``batch_size``, no worker processes (2 cores, 4 ranks); each run starts
with empty caches. Rounds interleave the three, rotating their order. Each rank of ours is
a process of this module, started by :func:`run_live`::

    .venv/bin/python -m bench.tables.remote_run rank SPEC_JSON
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["PEERS", "LiveConfig", "main", "run_live", "smoke_live"]

log = logging.getLogger(__name__)

PEERS = ("ffcv-pairs", "mosaic", "litdata")
_MARK = "@@RANK "
_BUCKET = "bench-remote"


@dataclass(frozen=True)
class LiveConfig:
    """What the live run reads.

    Attributes:
        pairs: Pairs in the dataset.
        shape: Each image's shape (uint8).
        shards: ffcv-pairs shards; the peers' shard size is the same bytes.
        page_bytes: ffcv-pairs' page size (8 pages a shard by default, as 8 MiB pages in
            shards of 64 MiB).
        batch_size: Per rank.
        epochs: Epochs each rank reads (the first from an empty cache).
        nodes: Simulated nodes.
        ranks_per_node: Ranks on each.
        rounds: Interleaved rounds.
        seed: Data and shuffle seed.
        timeout_s: A run's limit.
    """

    pairs: int = 30_000
    shape: tuple[int, ...] = (3, 32, 32)
    shards: int = 24
    page_bytes: int = 1 << 20
    batch_size: int = 64
    epochs: int = 2
    nodes: int = 2
    ranks_per_node: int = 2
    rounds: int = 3
    seed: int = 0
    timeout_s: float = 300.0


def smoke_live() -> LiveConfig:
    """Every path at small sizes: the figures mean little."""
    return LiveConfig(pairs=4_000, shards=8, rounds=1)


class _Counted:
    """One endpoint of the shared moto backend that counts the GET body bytes it sends."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.app = DomainDispatcherApplication(create_backend_app)
        self.bytes = self.gets = 0
        self._lock = threading.Lock()
        self.server = make_server("127.0.0.1", 0, self._counted, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def _counted(self, environ: dict[str, Any], start_response: Any) -> Iterator[bytes]:
        body = self.app(environ, start_response)
        get = environ.get("REQUEST_METHOD") == "GET"
        try:
            for chunk in body:
                if get:
                    with self._lock:
                        self.bytes += len(chunk)
                yield chunk
        finally:
            if get:
                with self._lock:
                    self.gets += 1
            getattr(body, "close", lambda: None)()

    def reset(self) -> None:
        with self._lock:
            self.bytes = self.gets = 0

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(10)


def _aws_env(url: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
        "S3_ENDPOINT_URL": url,  # Mosaic's own variable
        "AWS_ALLOW_HTTP": "true",  # obstore (LitData's S3 client) refuses http:// without it
    }


def _write(cfg: LiveConfig, work: Path) -> tuple[Path, int]:
    """The pairs as ffcv-pairs shards and as ``.npy`` for the peers: (manifest, shard bytes)."""
    from ffcv_pairs import ArraySource, write_pairs
    from ffcv_pairs.format.merging import merge_parts

    rng = np.random.default_rng(cfg.seed)
    a = rng.integers(0, 256, (cfg.pairs, *cfg.shape), dtype=np.uint8)
    b = (255 - a).astype(np.uint8)
    labels = np.arange(cfg.pairs, dtype=np.int64) % 1000
    npy = work / "npy"
    npy.mkdir(parents=True, exist_ok=True)
    for name, arr in (("A", a), ("B", b), ("labels", labels)):
        np.save(npy / f"{name}.npy", arr)
    cuts = np.linspace(0, cfg.pairs, cfg.shards + 1).astype(int)
    parts = []
    for k in range(cfg.shards):
        part = slice(int(cuts[k]), int(cuts[k + 1]))
        path = work / "ours" / f"s{k:03d}.beton"
        path.parent.mkdir(parents=True, exist_ok=True)
        source = ArraySource(a[part], b[part], labels[part])
        write_pairs(source, path, workers=1, progress=False, page_size=cfg.page_bytes)
        parts.append(path)
    manifest = work / "ours" / "train.json"
    merge_parts(parts, manifest).save(manifest)
    return manifest, max(p.stat().st_size for p in parts)


def _upload(manifest: Path, peers_out: dict[str, Path], url: str) -> None:
    """Every dataset into the bucket, through ``url`` (this process's environment names it
    while the upload runs, as a user's would)."""
    import fsspec
    import s3fs

    from ffcv_pairs.write.upload import upload_dataset

    saved = dict(os.environ)
    os.environ.update(_aws_env(url))
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        fs = fsspec.filesystem("s3")
        fs.mkdir(_BUCKET)
        upload_dataset(manifest, f"s3://{_BUCKET}/ours/train.json")
        for name, folder in peers_out.items():
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    fs.put_file(str(path), f"{_BUCKET}/{name}/{path.relative_to(folder)}")
    finally:
        os.environ.clear()
        os.environ.update(saved)
        s3fs.S3FileSystem.clear_instance_cache()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _can_unshare() -> bool:
    try:
        cmd = ["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm"]
        return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _du(path: Path) -> int:
    """Bytes on disk under ``path`` (allocated blocks: a sparse file counts what it holds)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
    return total


def _rank_cmd(peer: str, spec: dict[str, Any], python: Path | None) -> list[str]:
    if peer == "ffcv-pairs":
        return [sys.executable, "-m", "bench.tables.remote_run", "rank", json.dumps(spec)]
    script = Path(__file__).parents[1] / "extras" / "remote_peers.py"
    return [str(python), str(script), "rank", json.dumps(spec)]


def _one_run(
    cfg: LiveConfig, peer: str, ends: list[_Counted], work: Path, python: Path | None, ns: bool
) -> dict[str, Any]:
    """One run of ``peer`` on every node: its ranks' answers, bytes fetched and cache sizes."""
    root = work / "runs" / peer
    shutil.rmtree(root, ignore_errors=True)
    world = cfg.nodes * cfg.ranks_per_node
    port = _free_port()
    remote = {"ffcv-pairs": f"s3://{_BUCKET}/ours/train.json"}.get(peer, f"s3://{_BUCKET}/{peer}")
    procs, logs = [], []
    for end in ends:
        end.reset()
    for p in range(cfg.nodes):
        node = root / f"node{p}"
        (node / "tmp").mkdir(parents=True)
        cmds = []
        for local in range(cfg.ranks_per_node):
            rank = p * cfg.ranks_per_node + local
            spec = {"peer": peer, "remote": remote, "cache": str(node / "cache"), "rank": rank,
                    "world": world, "nodes": cfg.nodes, "batch_size": cfg.batch_size,
                    "epochs": cfg.epochs, "seed": cfg.seed}  # fmt: skip
            env = {**_aws_env(ends[p].url), "RANK": rank, "WORLD_SIZE": world, "LOCAL_RANK": local,
                   "LOCAL_WORLD_SIZE": cfg.ranks_per_node, "NODE_RANK": p, "GLOBAL_RANK": rank,
                   "NNODES": cfg.nodes, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                   "TMPDIR": node / "tmp", "FFCV_PAIRS_JOB": f"bench-{port}",
                   "OMP_NUM_THREADS": 1, "CUDA_VISIBLE_DEVICES": "",
                   "LITDATA_DISABLE_VERSION_CHECK": 1}  # fmt: skip
            sets = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in env.items())
            out = node / f"rank{rank}.log"
            logs.append(out)
            cmd = shlex.join(_rank_cmd(peer, spec, python))
            cmds.append(f"env {sets} {cmd} > {shlex.quote(str(out))} 2>&1 &")
        script = " ".join(cmds) + " wait"
        if ns:
            script = "mount -t tmpfs tmpfs /dev/shm && " + script
        argv = ["unshare", "-m", "sh", "-c", script] if ns else ["sh", "-c", script]
        procs.append(subprocess.Popen(argv, cwd=Path(__file__).parents[2], start_new_session=True))
    peaks = [0] * cfg.nodes
    deadline = time.monotonic() + cfg.timeout_s
    while any(pr.poll() is None for pr in procs) and time.monotonic() < deadline:
        for p in range(cfg.nodes):
            peaks[p] = max(peaks[p], _du(root / f"node{p}" / "cache"))
        time.sleep(0.2)
    timed_out = any(pr.poll() is None for pr in procs)
    for pr in procs:
        if pr.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pr.pid, 9)
            pr.wait(30)
    answers, errors = [], []
    for path in logs:
        text = path.read_text(errors="replace") if path.exists() else ""
        found = [ln[len(_MARK) :] for ln in text.splitlines() if ln.startswith(_MARK)]
        found += [ln[len("@@PEER ") :] for ln in text.splitlines() if ln.startswith("@@PEER ")]
        if found:
            answers.append(json.loads(found[-1]))
        else:
            lines = [ln for ln in text.splitlines() if ln.strip()]
            errors.append(f"{path.name}: {lines[-1] if lines else 'no output'}")
    caches = [_du(root / f"node{p}" / "cache") for p in range(cfg.nodes)]
    ours = [
        {part: sum(_du(d) for d in (root / f"node{p}" / "cache").glob(f"*/{part}"))
         for part in ("data", "meta")}
        for p in range(cfg.nodes)
    ] if peer == "ffcv-pairs" else None  # fmt: skip
    return {
        "ours_cache": ours,
        "peer": peer,
        "answers": answers,
        "errors": (["timed out"] if timed_out else []) + errors,
        "fetched": [e.bytes for e in ends],
        "gets": [e.gets for e in ends],
        "cache_final": caches,
        "cache_peak": [max(a, b) for a, b in zip(peaks, caches, strict=True)],
    }


def run_live(cfg: LiveConfig, work: Path, extras: bool) -> dict[str, Any]:
    """Write, upload, then ``cfg.rounds`` interleaved rounds of every peer that can run."""
    from bench.extras.remote_peers import MARK, peers_python

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    python, why = peers_python() if extras else (None, "--no-extras")
    ns = _can_unshare()
    manifest, shard_bytes = _write(cfg, work)
    peers_out: dict[str, Path] = {}
    notes: dict[str, str] = {}
    if python is not None:
        spec = {"npy_dir": str(work / "npy"), "mds": str(work / "mosaic"),
                "litdata": str(work / "litdata"), "shard_bytes": shard_bytes}  # fmt: skip
        script = Path(__file__).parents[1] / "extras" / "remote_peers.py"
        proc = subprocess.run([str(python), str(script), "prepare", json.dumps(spec)],
                              capture_output=True, text=True, timeout=900, check=False)  # fmt: skip
        if proc.returncode == 0 and MARK in proc.stdout:
            peers_out = {"mosaic": work / "mosaic", "litdata": work / "litdata"}
        else:
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            why = f"the peers' writers failed: {tail[-1] if tail else proc.returncode}"
    for peer in PEERS[1:]:
        if peer not in peers_out:
            notes[peer] = str(why)
    if peers_out:
        from bench.extras.remote_peers import VERSIONS

        notes["versions"] = ", ".join(f"{k} {v}" for k, v in VERSIONS.items()) + (
            "; LitData without obstore, its preferred S3 client, which refuses moto's http:// "
            "endpoint (LitData builds its S3Store without allow_http): LitData's boto3 path"
        )
    if not ns:
        notes["namespaces"] = "unshare -m failed: the nodes share /dev/shm and TMPDIR"
    ends = [_Counted() for _ in range(cfg.nodes)]
    runs: list[dict[str, Any]] = []
    try:
        _upload(manifest, peers_out, ends[0].url)
        peers = ["ffcv-pairs", *peers_out]
        for r in range(cfg.rounds):
            for peer in peers[r % len(peers) :] + peers[: r % len(peers)]:
                run = _one_run(cfg, peer, ends, work, python, ns)
                run["round"] = r
                run["complete"] = len(run["answers"]) == cfg.nodes * cfg.ranks_per_node
                log.info("remote run: round %d %s: fetched %s, errors %s", r, peer,
                         run["fetched"], run["errors"])  # fmt: skip
                runs.append(run)
    finally:
        for end in ends:
            end.stop()
    # What went up: object bytes (a .beton on local disk is sparse where pages are padded).
    stored = {"ffcv-pairs": work / "ours", **peers_out}
    sizes = {
        k: sum(p.stat().st_size for p in v.rglob("*") if p.is_file()) for k, v in stored.items()
    }
    return {"config": asdict(cfg), "runs": runs, "notes": notes, "stored": sizes,
            "shard_bytes": shard_bytes, "namespaces": ns}  # fmt: skip


def _our_rank(spec: dict[str, Any]) -> dict[str, Any]:
    """One rank of ours: ``make_loader`` on the S3 manifest, ``partition="node"``."""
    from ffcv_pairs import make_loader

    t0 = time.time()
    loader = make_loader(
        spec["remote"],
        batch_size=spec["batch_size"],
        seed=spec["seed"],
        rank=spec["rank"],
        world_size=spec["world"],
        partition="node",
        canonical_nodes=spec["nodes"],
        cache_dir=spec["cache"],
        drop_last=True,
    )
    epochs = []
    for epoch in range(spec["epochs"]):
        loader.set_epoch(epoch)
        start, count = time.time(), 0
        for batch in loader:
            count += int(batch[-1].shape[0])
        epochs.append({"start": start, "end": time.time(), "samples": count})
    loader.close()
    return {"built": t0, "epochs": epochs}


def main(argv: list[str]) -> int:
    """``rank SPEC``: one rank of ours, its answer behind the mark (run by :func:`run_live`)."""
    if len(argv) != 3 or argv[1] != "rank":
        sys.stderr.write("usage: python -m bench.tables.remote_run rank SPEC_JSON\n")
        return 2
    sys.stdout.write(_MARK + json.dumps(_our_rank(json.loads(argv[2]))) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
