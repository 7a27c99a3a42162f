"""The machine-learning core: models, engine, precision, metrics, options, settings, work budgets.

It imports only the floors below (:mod:`samelang.primitives`, :mod:`samelang.corpora`, :mod:`samelang.indexes`);
the service, the judge, the training and the bench import it."""
