// Package release is "guard release": it hands back what an installation
// owns before it is uninstalled. It closes each open circuit of the
// installation, restoring each webhook exactly as its record entry says it
// was, removes the installation's record entries and, in a later write
// (circuit.DisarmAfter after, the order of a closing), its arming entries,
// then deletes the marking policies of its mutating targets and, with
// --all, the guard policy. It refuses while the installation has a leader,
// which would open the circuits again; the order is: plan everything,
// stop the guard, release, delete the rest. What fails after it scaled
// the guard down scales it back up.
//
// It writes as an administrator, not as the breaker: each configuration
// gets two JSON patches, the first restoring the fields with the override
// annotation added (the guard policy admits owned-field changes that
// carry it), the second removing that annotation alone (which the guard
// policy admits from anyone). The planning (PlanRelease, PlanPatches) is
// plain Go; the command reads and writes the objects. It must not change
// anything of another installation: entries not signed by this one, and
// their fields, are left alone.
package release
