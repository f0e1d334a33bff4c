"""Sub-commands of the ``autotaccl`` CLI; every module here is registered automatically."""
