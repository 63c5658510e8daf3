package bench

import (
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p <= 100) of ds, nearest
// rank; 0 for none. It sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds))*p/100+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// median returns the median of vs (the mean of the middle two for an even
// count); 0 for none. It sorts vs.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}

// ms converts a duration to milliseconds as a float.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// rate is n per second over d.
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
