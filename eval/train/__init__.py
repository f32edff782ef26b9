"""`oxygen-gym train`: pi0.5's objective (oxygen_gym.model.pi05.training) on LIBERO HDF5 demonstrations, resumable."""
from .dataset import DemoDataset, compute_norm_stats
from .trainer import TrainConfig, train

__all__ = ["DemoDataset", "TrainConfig", "compute_norm_stats", "train"]
