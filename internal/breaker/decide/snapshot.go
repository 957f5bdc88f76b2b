package decide

import "github.com/webhook-guard/webhook-guard/internal/circuit"

// Snapshot is one configuration as the reconciler read it, decoded once:
// every decision about it (Plan, NextStep, Due) reads the record and the
// arming entries from here, not from the annotations again.
type Snapshot struct {
	// View is the configuration.
	View *circuit.ConfigView
	// Record is its circuit record; nil, with RecordErr, when it cannot be
	// read (then nothing is changed until it is repaired or handed over).
	Record    circuit.Record
	RecordErr error
	// Armed are its arming entries; empty when they cannot be read
	// (ArmedErr): only the breaker writes them, so it rewrites them.
	Armed    circuit.Record
	ArmedErr error
}

// Read decodes view into a Snapshot.
func Read(view *circuit.ConfigView) Snapshot {
	s := Snapshot{View: view}
	s.Record, s.RecordErr = circuit.Decode(view.Annotations)
	if s.Armed, s.ArmedErr = circuit.DecodeArming(view.Annotations); s.ArmedErr != nil {
		s.Armed = circuit.Record{}
	}
	return s
}
