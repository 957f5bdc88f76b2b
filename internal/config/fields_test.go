package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFieldPaths_listsEveryLeafOfTheFile(t *testing.T) {
	got := FieldPaths()
	for _, want := range []string{
		"apiVersion",
		"holdWhenAllFail",
		"apiserverScrapeInterval",
		"targets[].allowAdmissionWithoutValidation",
		"targets[].probe.path",
		"targets[].apiserverSignal.trafficAsProbe",
		"targets[].apiserverSignal.pathProbe.service.port",
	} {
		assert.Contains(t, got, want)
	}
	assert.NotContains(t, got, "targets", "a list of objects is no leaf")
	assert.NotContains(t, got, "targets[].apiserverSignal.pathProbe", "an object is no leaf")
}
