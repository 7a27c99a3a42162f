"""The HTTP face of the service: per route a pydantic protocol, a thin router and a handler built once
on ``app.state``; the pipeline never sees HTTP types."""
