"""Lorekeeper's pydantic contracts: the data model, API bodies, settings and the error tree.

This package imports nothing else of ours; every other layer imports it. Import from the submodules
(``from schemas.story import Turn``) so that loading one model does not load them all.
"""
