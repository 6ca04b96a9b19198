"""tfringrun: a horovodrun-compatible launcher over the mpirun of the MPI tfring was built with."""
