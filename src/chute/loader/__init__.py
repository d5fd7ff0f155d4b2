"""Loading: ``chute.Loader`` (worker threads, ``threads``; its batch buffers are in
``chute/buffers.py``) and ``chute.dataloader`` (a torch DataLoader over worker processes), which
share the epoch and one-pass logic (``passes``)."""
