"""The four store families: a protocol each, sibling backends, one factory from settings.

``from stores.factory import open_stores`` gives the configured backends; the protocols live in
``stores.<family>.base``.
"""
