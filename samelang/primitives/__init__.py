"""The ground floor: what every layer uses and nothing of the project's own (atomic writes, text
checks, language identification, the model identity record). The corpora live on the same floor
in :mod:`samelang.corpora`."""
