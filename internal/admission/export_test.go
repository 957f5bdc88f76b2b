package admission

// Exported for the external test package.
var NoManagedConfigurationName = noManagedConfigurationName

var RuleDigest = ruleDigest
