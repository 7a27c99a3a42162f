"""Model preparation and loading (base encoder, generator)."""
