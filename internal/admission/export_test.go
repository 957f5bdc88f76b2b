package admission

// Exported for the external test package.
var (
	CelQuote                   = celQuote
	NoManagedConfigurationName = noManagedConfigurationName
)
