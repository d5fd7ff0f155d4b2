"""Loading: ``chute.Loader`` (worker threads, ``threads``; batch buffers, ``buffers``) and
``chute.dataloader`` (a torch DataLoader over worker processes), which share the epoch and
one-pass logic (``passes``)."""
