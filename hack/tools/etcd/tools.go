//go:build tools

// Package tools pins etcd for the e2e control plane.
package tools

import _ "go.etcd.io/etcd/server/v3"
