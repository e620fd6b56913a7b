package sim

import (
	"fmt"

	"github.com/ghba/ghba/routing"
)

// replicated is an owner's filter and the arrays that hold its replicas.
// The owner propagates a delta (Filter.MarkDelta, applied with
// FilterArray.Apply) once the changed share of its bits reaches the
// threshold (HBA §6: "the percentage of bits in a BF that must be changed
// before updating its replicas"); a threshold of 0 propagates every change,
// which keeps every replica exact.
type replicated struct {
	id        string
	f         *routing.Filter
	threshold float64
	sinks     []*routing.FilterArray
	pushes    int64 // propagations (each is one multicast or one message per sink group)
	buf       []byte
}

// newReplicated starts tracking f from its current state: the state the
// replicas will be initialized with.
func newReplicated(id string, f *routing.Filter, threshold float64) *replicated {
	f.Mark()
	return &replicated{id: id, f: f, threshold: threshold}
}

// addSink puts a replica of the current filter into a.
func (r *replicated) addSink(a *routing.FilterArray) error {
	if err := a.Add(r.id, r.f); err != nil {
		return fmt.Errorf("replica of %s: %w", r.id, err)
	}
	r.sinks = append(r.sinks, a)
	return nil
}

// changed is called after the owner modified f; it propagates when the
// threshold is reached.
func (r *replicated) changed() error {
	if r.f.ChangedBits() == 0 {
		return nil
	}
	if r.threshold > 0 && r.f.ChangedFraction() < r.threshold {
		return nil
	}
	r.buf = r.f.MarkDelta(r.buf[:0])
	r.pushes++
	if len(r.sinks) == 0 {
		return nil
	}
	d, err := routing.DecodeDelta(r.buf)
	if err != nil {
		return fmt.Errorf("delta of %s: %w", r.id, err)
	}
	for _, a := range r.sinks {
		if err := a.Apply(r.id, d); err != nil {
			return fmt.Errorf("delta of %s: %w", r.id, err)
		}
	}
	return nil
}

// prober applies the unique-hit rule to a replica array as seen by the
// entry server: the array holds everyone's replicas, but the entry server's
// own member is its live filter, not a replica.
type prober struct {
	buf []string
}

// probe queries arr for k. When exact is false, the column of member self
// (if self != "") is replaced by selfLive, the answer of the live filter.
func (p *prober) probe(arr *routing.FilterArray, k routing.Key, exact bool, self string, selfLive bool) routing.Result {
	if exact || self == "" {
		return arr.QueryKey(k)
	}
	p.buf = arr.Positives(k, p.buf[:0])
	var res routing.Result
	for _, id := range p.buf {
		if id == self {
			continue
		}
		res.Positives++
		res.ID = id
	}
	if selfLive {
		res.Positives++
		res.ID = self
	}
	if res.Positives != 1 {
		res.ID = ""
	}
	return res
}

// rate is a share that is 0 for an empty denominator.
func rate(num, den int64) float64 {
	if den == 0 {
		return 0
	}
	return float64(num) / float64(den)
}
