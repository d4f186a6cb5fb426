package expansion

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestSpike(t *testing.T) {
	info, err := loadSchema()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%+v\n%+v\n%+v\n", info.expressions, info.unions, info.listKeys)
	mk := func(spec map[string]interface{}) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "tiled.blueskyproject.io/v1alpha1", "kind": "TiledInstance", "spec": spec}}
	}
	a, err := info.converter.ObjectToTyped(mk(map[string]interface{}{"tiled": map[string]interface{}{"image": "x", "env": []interface{}{map[string]interface{}{"name": "A", "value": "1"}}}, "auth": map[string]interface{}{"singleUserAPIKey": map[string]interface{}{}}, "config": map[string]interface{}{"a": map[string]interface{}{"b": int64(1)}}}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := info.converter.ObjectToTyped(mk(map[string]interface{}{"tiled": map[string]interface{}{"env": []interface{}{map[string]interface{}{"name": "B", "value": "2"}}}, "config": map[string]interface{}{"a": map[string]interface{}{"c": int64(1)}}}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := a.Merge(b)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("%v\n", m.AsValue().Unstructured())
	fs, _ := m.ToFieldSet()
	fmt.Println(fs.Leaves().String())
	_, err = info.converter.ObjectToTyped(mk(map[string]interface{}{"storage": map[string]interface{}{"data": map[string]interface{}{"sise": "1"}}}))
	fmt.Printf("%T %v\n", err, err)
}
