"""The HTTP surface: the Starlette app, its routes, schemas and ASGI middleware."""
