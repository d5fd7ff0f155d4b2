"""The field kinds a dataset's schema is made of, by their own names: ``chute.fields.Tensor``,
``Ragged``, ``Image``, ``Mask``, ``Bytes`` and ``String``.

Spelled through this namespace they never collide with ``torch.Tensor`` or ``PIL.Image`` in
user code::

    from chute import fields

    schema = {"image": fields.Image(), "label": fields.Tensor((), "int64")}

Each kind's behaviour (files, manifest entry, writing, reading, mixing) lives on its class, one
module per kind in :mod:`chute.kinds`; ``docs/field_kinds.md`` says how a kind is added.
"""

from .kinds import Bytes, Field, Image, Mask, Ragged, String, Tensor

__all__ = ["Bytes", "Field", "Image", "Mask", "Ragged", "String", "Tensor"]
