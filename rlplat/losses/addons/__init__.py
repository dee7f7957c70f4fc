"""Loss add-ons: extra policy-loss terms an on-policy loss adds, chosen under ``loss.addons``
(entry-point group ``rlplat.loss_addons``; the interface is in :mod:`rlplat.losses.addons.base`).

* ``kl_to_reference`` (:class:`rlplat.losses.addons.kl_to_reference.KLToReference`): the
  exact KL(pi || pi_ref) to a reference policy loaded from another run.
"""

from rlplat.losses.addons.base import (
    LossAddon,
    LossAddonFactory,
    PolicyLoader,
    WeightedAddon,
    addon_terms,
    build_addons,
)

__all__ = ["LossAddon", "LossAddonFactory", "PolicyLoader", "WeightedAddon", "addon_terms", "build_addons"]
