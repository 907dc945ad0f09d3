"""benchmarks/credit/eps_calibration.py: how BiGPO's clusters agree with GiGPO's exact anchors."""
import numpy as np

from benchmarks.credit.eps_calibration import cluster_agreement


def test_cluster_agreement_counts_rows_of_merged_and_of_split_states():
    anchors = np.array([0, 0, 1, 1, 2, 3])
    assert cluster_agreement(anchors, anchors.copy()) == (0.0, 0.0)         # clusters = anchors
    # cluster 0 merges states 0 and 1 (4 rows); state 2 alone; state 3 alone
    assert cluster_agreement(anchors, np.array([0, 0, 0, 0, 1, 2])) == (4 / 6, 0.0)
    # state 0 split over clusters 0 and 1 (2 rows); no cluster holds two states
    assert cluster_agreement(anchors, np.array([0, 1, 2, 2, 3, 4])) == (0.0, 2 / 6)
    # one cluster of everything: every row merged, none split
    assert cluster_agreement(anchors, np.zeros(6, dtype=np.int64)) == (1.0, 0.0)
