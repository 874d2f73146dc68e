"""pytest fixtures that start the API-server double in-process on a free port."""
