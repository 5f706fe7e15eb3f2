"""Rank -> GPU mapping from trace metadata and the job's allocation."""

from __future__ import annotations

from hpcscope.analysis.traces.rank_gpus import map_ranks_to_gpus

TWO_NODES = [(f"gpu-n{n:02d}", g) for n in (1, 2) for g in range(8)]


def test_host_name_and_device_index_win() -> None:
    placed = map_ranks_to_gpus([(11, "gpu-n01.cluster.local", 5)], TWO_NODES)
    assert (placed[11].node, placed[11].gpu) == ("gpu-n01", 5)
    assert placed[11].how == "host_name, device index"


def test_rank_order_without_host_name() -> None:
    placed = map_ranks_to_gpus([(r, None, None) for r in range(16)], TWO_NODES)
    assert [(placed[r].node, placed[r].gpu) for r in (0, 7, 8, 15)] == [
        ("gpu-n01", 0),
        ("gpu-n01", 7),
        ("gpu-n02", 0),
        ("gpu-n02", 7),
    ]
    assert placed[8].how == "rank order, local rank"


def test_device_index_counts_the_allocated_gpus_of_the_node() -> None:
    # Slurm gave GPUs 2, 3, 6 of the node: CUDA_VISIBLE_DEVICES=2,3,6, so device 2 is GPU 6
    placed = map_ranks_to_gpus(
        [(0, "a", 0), (1, "a", 1), (2, "a", 2)], [("a", 6), ("a", 2), ("a", 3)]
    )
    assert [placed[r].gpu for r in range(3)] == [2, 3, 6]


def test_natural_node_order_and_unplaceable_ranks() -> None:
    allocation = [("node10", 0), ("node9", 0)]
    placed = map_ranks_to_gpus([(0, None, None), (1, None, None), (2, None, None)], allocation)
    assert placed[0].node == "node9" and placed[1].node == "node10"
    assert 2 not in placed  # more ranks than GPUs
    assert map_ranks_to_gpus([(0, "x", 3)], [("x", 0)]) == {}
    assert map_ranks_to_gpus([(0, None, None)], []) == {}
