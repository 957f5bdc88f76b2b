// Package startcheck holds the checks "guard run" makes before it starts:
// that this identity may write every target, that every target can be
// probed, that no other installation manages the same configurations
// (and the take-over of the open circuits of one that no longer runs),
// that no open circuit of a removed target is left stuck, and that the
// marking policies are in place. A failed check names what is wrong and
// how to fix it; the service then does not start. Apart from the take-over
// it only reads. WarnInterceptors is advice, not a check: it logs the
// webhooks that intercept the service's own requests and never fails the
// start.
package startcheck
