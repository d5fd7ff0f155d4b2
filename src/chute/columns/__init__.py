"""The array code on a field's files, below the field kinds (:mod:`chute.kinds`), which are
built from it: a batch of user values checked and converted to a field's arrays
(``values``, ``image_values``, ``var_batch``; a source's images in ``source_images``), and a
part's arrays read back, one sample, a slice or a gather over parts (``gather``, its copy
loop ``segments``; image fields' batches in ``encoded_images``). It knows dtypes and shapes,
never a kind."""
