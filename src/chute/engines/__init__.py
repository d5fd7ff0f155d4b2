"""Bridges to the engines chute scales out on: Ray Data (``ray_read``, ``ray_write``, behind
:mod:`chute.ray`). Each imports its engine; nothing imports them until used."""
