# Small statistics for the benchmark scripts (sourced by sssp-vs-reference
# and sssp-scaling).

# The median of the numbers on stdin, separated by spaces or newlines; "nan"
# when there are none.
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else print (v[NR/2] + v[NR/2+1]) / 2}'; }
