"""Who races and how: the contestants, their processes, and the interleaved rounds.

The throughput table is :func:`bench.contest.rounds.measure_rounds` over
:data:`bench.contest.contestants.CONTESTANTS`; tables c and e and the user-scale run race
through the same rounds.
"""

__all__: list[str] = []
