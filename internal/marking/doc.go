// Package marking owns the marks on objects admitted without a webhook's
// mutation while its circuit is open: the names of the label and the
// annotation, and the MutatingAdmissionPolicy (with its binding) that puts
// them on every object the bypassed webhook would have seen. It renders,
// keeps and removes those policies; the breaker decides when. It imports
// only the circuit contract.
package marking
