"""The ``compcap-lab`` command tables, one module per room (the ``compcap_lab.commands`` entry-point
group names them): ``pipeline`` (world, train, build, splits, models), ``studies`` (the reproduction and
the other studies), ``load`` (the load studies)."""
