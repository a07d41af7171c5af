"""Link-level contention model: bandwidth sharing on NICs, PCIe/NVLink and rack uplinks."""

from deepshare.core.contention.link.model import LinkContention, LinkState
from deepshare.core.contention.link.params import LinkCatalog, LinkParams, default_link_catalog, load_link_catalog

__all__ = ["LinkCatalog", "LinkContention", "LinkParams", "LinkState", "default_link_catalog", "load_link_catalog"]
