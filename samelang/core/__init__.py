"""The machine-learning core: models, engine, precision, metrics, options, settings, work budgets.

It imports only :mod:`samelang.indexes`; the service, the training and the bench import it."""
