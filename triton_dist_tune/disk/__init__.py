"""What the tuner keeps on disk: :mod:`.cache` reads and writes the decisions (one standard-JSON file per
function, key, config space, group size and hardware), :mod:`.versions` reads the software versions a decision
records (exactly, or for a display from the cache folder's record of them), :mod:`.files` writes files atomically,
:mod:`.decisions` reads, filters and removes a cache folder's decisions for the command line, :mod:`.bundles`
exports and imports them as one file, :mod:`.logs` writes each rank's log of a job and prints rank 0's summaries,
and :mod:`.timeline` reads a job's logs back as one timeline. The folders come from :mod:`triton_dist_tune.settings`.
"""
