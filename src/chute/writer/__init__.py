"""Writing: values checked and converted (``values``), appended to each field's files
(``field_files``), committed atomically under the dataset's lock (``commit``); ``writer`` holds
``chute.write`` and ``chute.Writer``."""
