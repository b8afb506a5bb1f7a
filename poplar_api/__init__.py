"""A Poplar-like Python API whose graphs run on the ipusim machine model."""
