// kstatus prints the status sigs.k8s.io/cli-utils/pkg/kstatus computes for each object on stdin (a
// stream of JSON objects), one JSON line each: {"status": "InProgress", "message": "..."}. It is the
// library Flux's kustomize-controller and `kubectl`-based tooling use; the tests run our NodeConfigs
// through it instead of through a copy of its rules.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := json.NewDecoder(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.More() {
		var raw json.RawMessage
		if err := in.Decode(&raw); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus: reading stdin:", err)
			os.Exit(2)
		}
		// UnmarshalJSON keeps integers as int64, which kstatus's generation check requires.
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			fmt.Fprintln(os.Stderr, "kstatus: not a Kubernetes object:", err)
			os.Exit(2)
		}
		result, err := status.Compute(obj)
		if err != nil {
			fmt.Fprintln(os.Stderr, "kstatus:", err)
			os.Exit(1)
		}
		if err := out.Encode(map[string]string{"status": result.Status.String(), "message": result.Message}); err != nil {
			os.Exit(2)
		}
	}
}
