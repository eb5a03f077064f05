"""From image files to model-ready training batches: folders and checks, the per-sample and batch paths,
where the decoded images live (``placement.py``), and the one iterable the trainer loops over (``batches.py``).

Imports the core (and ``models/extensions.py`` for your transforms); nothing of training, models or outputs.
"""
