// Package config owns the GuardConfiguration file format: strict decoding,
// validation with errors that name the file, field and value, and
// defaulting in one place. It performs no I/O besides reading the file and
// knows nothing about the cluster.
package config
