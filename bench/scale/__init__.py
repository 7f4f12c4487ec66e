"""Runs at scale, each by hand and for hours: the user's day and a file larger than RAM.

``python -m bench --user-scale N`` (:mod:`bench.scale.user_scale`) and
``python -m bench --larger-than-ram`` (:mod:`bench.scale.larger_than_ram`).
"""

__all__: list[str] = []
