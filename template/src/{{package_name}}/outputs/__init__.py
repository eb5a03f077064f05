"""What a run writes besides checkpoints: ``metrics.jsonl``, curves and grids, TensorBoard, MLflow.

``writers.py`` builds them from the config behind one small interface (``Output``). Imports the core only.
"""
