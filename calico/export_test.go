package calico

// WithDefaults is ApplyOptions.withDefaults, for the tests of package calico_test.
func (o ApplyOptions) WithDefaults() ApplyOptions { return o.withDefaults() }
