"""Self-training: sample trajectories, reward them, select the best, export per-agent
chat examples, and (with the `train` extra) fine-tune a LoRA adapter on them."""

from marag.train.loop import TrainConfig, combine, examples, export, reward, sample, select, select_file

__all__ = ["TrainConfig", "combine", "examples", "export", "reward", "sample", "select", "select_file"]
