"""TokenBatches (shuffled, resumable, rank-split training batches) and eval_batches."""

import json

import numpy as np
import pytest
import torch

from depthattn.data import DataError, TokenBatches, TokenShards, eval_batches
from depthattn.data.shards import count_eval_batches
from tests.data.data_helpers import write_token_dataset

SEQ_LEN = 10
NUM_WINDOWS = 1000


@pytest.fixture
def shards(tmp_path):
    """Token i is i, so the window starting at token w * SEQ_LEN is window w; shards of 4,096 tokens."""
    tokens = np.arange(NUM_WINDOWS * SEQ_LEN + 1)
    return TokenShards(write_token_dataset(tmp_path, tokens), "train")


def windows_of(input_ids: torch.Tensor) -> list[int]:
    return (input_ids[:, 0] // SEQ_LEN).tolist()


def test_batches_are_shifted_windows_and_deterministic(shards):
    batches = TokenBatches(shards, batch_size=4, seq_len=SEQ_LEN, seed=1)
    input_ids, labels = next(batches)
    assert input_ids.shape == labels.shape == (4, SEQ_LEN) and input_ids.dtype == labels.dtype == torch.int64
    assert torch.equal(labels, input_ids + 1)  # token i is i: labels are the next tokens
    assert torch.equal(input_ids[:, 0] % SEQ_LEN, torch.zeros(4, dtype=torch.int64))

    again, other_seed = TokenBatches(shards, 4, SEQ_LEN, seed=1), TokenBatches(shards, 4, SEQ_LEN, seed=2)
    assert torch.equal(next(again)[0], input_ids)
    assert not torch.equal(next(other_seed)[0], input_ids)


def test_each_epoch_visits_every_window_once_in_a_new_order(shards):
    batches = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=0)
    assert batches.batches_per_epoch == NUM_WINDOWS // 8
    epochs = [[w for _ in range(batches.batches_per_epoch) for w in windows_of(next(batches)[0])] for _ in range(2)]
    assert batches.epoch == 2 and batches.step == 0
    for windows in epochs:
        assert len(set(windows)) == len(windows) == NUM_WINDOWS // 8 * 8
    assert epochs[0] != epochs[1]


@pytest.mark.parametrize(
    "stop_after", [7, NUM_WINDOWS // 8, NUM_WINDOWS // 8 + 3]
)  # mid-epoch, at the boundary, next epoch
def test_resume_from_state_dict_continues_with_the_same_batches(shards, stop_after):
    uninterrupted = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=5)
    expected = [next(uninterrupted)[0] for _ in range(stop_after + 10)]

    killed = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=5)
    for _ in range(stop_after):
        next(killed)
    state = json.loads(json.dumps(killed.state_dict()))  # as a checkpoint would store it

    resumed = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=5)
    resumed.load_state_dict(state)
    for step in range(stop_after, stop_after + 10):
        assert torch.equal(next(resumed)[0], expected[step])


def test_ranks_split_the_global_batch_of_one_process(shards):
    single = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=3)
    ranks = [TokenBatches(shards, batch_size=4, seq_len=SEQ_LEN, seed=3, rank=rank, world_size=2) for rank in (0, 1)]
    assert ranks[0].batches_per_epoch == single.batches_per_epoch
    for _ in range(single.batches_per_epoch + 5):  # into the second epoch
        (x0, y0), (x1, y1) = next(ranks[0]), next(ranks[1])
        x, y = next(single)
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
        assert not set(windows_of(x0)) & set(windows_of(x1))


def test_load_state_dict_refuses_a_different_setup(shards):
    state = TokenBatches(shards, batch_size=8, seq_len=SEQ_LEN, seed=5).state_dict()
    with pytest.raises(DataError, match="seq_len=10, this run has 5"):
        TokenBatches(shards, batch_size=8, seq_len=5, seed=5).load_state_dict(state)
    TokenBatches(shards, batch_size=4, seq_len=SEQ_LEN, seed=5, rank=1, world_size=2).load_state_dict(state)


def test_eval_batches_cover_every_window_in_order(shards):
    batches = list(eval_batches(shards, batch_size=64, seq_len=SEQ_LEN))
    assert [w for x, _ in batches for w in windows_of(x)] == list(range(NUM_WINDOWS))
    assert batches[-1][0].shape == (NUM_WINDOWS % 64, SEQ_LEN)
    assert all(torch.equal(y, x + 1) for x, y in batches)
    assert count_eval_batches(shards, 64, SEQ_LEN) == len(batches)  # what `train` says it scored
    again = list(eval_batches(shards, batch_size=64, seq_len=SEQ_LEN, max_batches=3))
    assert len(again) == 3 and all(torch.equal(a[0], b[0]) for a, b in zip(again, batches[:3], strict=True))


def test_too_few_tokens_for_a_batch_is_an_error(tmp_path):
    shards = TokenShards(write_token_dataset(tmp_path, np.arange(50)), "train")
    with pytest.raises(DataError, match="has 50 tokens, too few for 8 windows of 11 tokens"):
        TokenBatches(shards, batch_size=4, seq_len=10, world_size=2)
    with pytest.raises(DataError, match="too few for 1 windows of 65 tokens"):
        list(eval_batches(shards, batch_size=4, seq_len=64))
