"""Self-training: sample trajectories, reward them, select the best, export per-agent
chat examples, and (with the `train` extra) fine-tune a LoRA adapter on them."""

from marag.train.loop import (
    TRAINABLE_ROLES,
    TrainConfig,
    combine,
    examples,
    export,
    reference_reward,
    reward,
    reward_report,
    reward_spread,
    sample,
    select,
    select_file,
)

__all__ = ["TRAINABLE_ROLES", "TrainConfig", "combine", "examples", "export", "reference_reward", "reward", "reward_report",
           "reward_spread", "sample", "select", "select_file"]  # fmt: skip
