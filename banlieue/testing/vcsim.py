"""pytest fixtures that start vcsim processes on free ports."""
