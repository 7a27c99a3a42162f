"""samelang: multilingual retrieval-augmented QA that answers in the reader's language."""

__version__ = "0.1.0"
