"""NIR graphs in and out of polyhal (needs the ``neuro`` extra: ``pip install polyhal[neuro]``).

`NIR <https://neuroir.org>`_ is the interchange format of spiking networks;
its primitives map one to one onto polyhal's ``snn`` domain. NIR states no
time step, integration method or reset rule, so reading takes them:

>>> from polyhal.interop.nir import load_nir, save_nir    # doctest: +SKIP
>>> graph = load_nir("model.nir", dt=1e-3)                 # doctest: +SKIP
>>> save_nir(graph, "copy.nir")                            # doctest: +SKIP

:func:`load_nir` also takes a ``nir.NIRGraph`` object, and :func:`to_nir`
gives one.
"""

from polyhal.interop.nir.exporter import save_nir, to_nir
from polyhal.interop.nir.importer import load_nir

__all__ = ["load_nir", "save_nir", "to_nir"]
