"""In-tree plugins, one module per policy. `framework.registry` lists them."""
