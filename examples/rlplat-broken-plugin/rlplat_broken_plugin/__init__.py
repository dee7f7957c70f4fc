"""A deliberately broken rlplat plugin (see README.md): its entries fail to load."""
