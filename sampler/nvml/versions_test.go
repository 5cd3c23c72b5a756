package nvml

import "testing"

func TestParseNVMLVersion(t *testing.T) {
	for _, tc := range []struct {
		in   string
		api  APIVersion
		fail bool
	}{
		{"12.535.183.01", api12_2, false},
		{"12.550.54.15", api12_4, false},
		{"12.575.51.03", api12_9, false},
		{"13.580.65.06", api13_0, false},
		{"13.590.44.01", api13_1, false},
		{"13.610.1", api13_1, false},
		{"11.470.82.01", APIVersion{11, 0}, false},
		{"", APIVersion{}, true},
		{"abc", APIVersion{}, true},
	} {
		v, err := ParseNVMLVersion(tc.in)
		if (err != nil) != tc.fail || (!tc.fail && v.API != tc.api) {
			t.Errorf("ParseNVMLVersion(%q) = %v, %v; want %v (fail %v)", tc.in, v.API, err, tc.api, tc.fail)
		}
	}
}

func TestFieldIDs(t *testing.T) {
	for _, tc := range []struct {
		sym string
		api APIVersion
		id  uint32
		ok  bool
	}{
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", api12_2, 0, false},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", api12_8, 0, false},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", api12_9, 251, true},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", api13_0, 253, true},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN", api13_1, 269, true},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN", APIVersion{14, 0}, 271, true},
		{"NVML_FI_DEV_PERF_POLICY_POWER", api12_2, 74, true},
		{"NVML_FI_DEV_PERF_POLICY_RELIABILITY", api13_1, 79, true},
		{"NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST", api12_2, 76, true},
		{"NVML_FI_DEV_PCIE_COUNT_TX_BYTES", api12_3, 0, false},
		{"NVML_FI_DEV_PCIE_COUNT_RX_BYTES", api12_4, 198, true},
		{"NVML_FI_DEV_POWER_INSTANT", api12_2, 186, true},
		{"NVML_FI_DEV_NO_SUCH", api13_1, 0, false},
	} {
		id, _, ok := FieldID(tc.sym, tc.api)
		if id != tc.id || ok != tc.ok {
			t.Errorf("FieldID(%s, %v) = %d, %v; want %d, %v", tc.sym, tc.api, id, ok, tc.id, tc.ok)
		}
	}
	// No id means two things in one version.
	for _, v := range []APIVersion{api12_2, api12_4, api12_9, api13_0, api13_1} {
		seen := map[uint32]string{}
		for _, f := range fieldDefs {
			id, _, ok := FieldID(f.symbol, v)
			if !ok {
				continue
			}
			if other, dup := seen[id]; dup && other != f.symbol && !aliases(other, f.symbol) {
				t.Errorf("NVML %v: field %d is both %s and %s", v, id, other, f.symbol)
			}
			seen[id] = f.symbol
		}
	}
}

func aliases(a, b string) bool {
	pairs := map[string]string{
		"NVML_FI_DEV_PERF_POLICY_POWER":      "NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_POWER_CAP",
		"NVML_FI_DEV_PERF_POLICY_SYNC_BOOST": "NVML_FI_DEV_CLOCKS_EVENT_REASON_SYNC_BOOST",
	}
	return pairs[a] == b || pairs[b] == a
}
