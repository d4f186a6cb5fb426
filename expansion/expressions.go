package expansion

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
)

// ExpressionCostLimit bounds the runtime cost (cel-go's cost units, roughly one per operation and
// per character of strings built) of evaluating one expression for one instance. The expressions
// this API is for (strings built from names and labels) cost well under a hundred.
const ExpressionCostLimit = 100_000

// celInstance and celCluster are the variables `instance` and `cluster` of expressions. The
// namespace is a field of both rather than a variable of its own: `namespace` is a reserved word
// of CEL.
type celInstance struct {
	Name      string            `cel:"name"`
	Namespace string            `cel:"namespace"`
	Labels    map[string]string `cel:"labels"`
}

type celCluster struct {
	Name      string            `cel:"name"`
	Namespace string            `cel:"namespace"`
	Labels    map[string]string `cel:"labels"`
}

// exprContext is what an expression sees when it is evaluated for one instance.
type exprContext struct {
	instanceName string // short name, for errors
	vars         map[string]any
}

func newExprContext(instanceName string, instanceLabels map[string]string, clusterName string, clusterLabels map[string]string, namespace string) *exprContext {
	if instanceLabels == nil {
		instanceLabels = map[string]string{}
	}
	if clusterLabels == nil {
		clusterLabels = map[string]string{}
	}
	return &exprContext{
		instanceName: instanceName,
		vars: map[string]any{
			"instance": celInstance{Name: instanceName, Namespace: namespace, Labels: instanceLabels},
			"cluster":  celCluster{Name: clusterName, Namespace: namespace, Labels: clusterLabels},
		},
	}
}

var (
	celEnvOnce sync.Once
	celEnv     *cel.Env
	celEnvErr  error
)

// environment returns the CEL environment shared by all expressions: the variables instance and
// cluster (each with name, namespace and labels), and cel-go's string extensions (lowerAscii,
// replace, split, ...).
func environment() (*cel.Env, error) {
	celEnvOnce.Do(func() {
		celEnv, celEnvErr = cel.NewEnv(
			ext.NativeTypes(reflect.TypeFor[celInstance](), reflect.TypeFor[celCluster](), ext.ParseStructTags(true)),
			ext.Strings(),
			cel.Variable("instance", cel.ObjectType("expansion.celInstance")),
			cel.Variable("cluster", cel.ObjectType("expansion.celCluster")),
		)
	})
	return celEnv, celEnvErr
}

// celTypeOf maps the OpenAPI type of the field an expression computes to the CEL type it must have.
func celTypeOf(openAPIType string) (*cel.Type, error) {
	switch openAPIType {
	case "string":
		return cel.StringType, nil
	case "integer":
		return cel.IntType, nil
	case "number":
		return cel.DoubleType, nil
	case "boolean":
		return cel.BoolType, nil
	}
	return nil, fmt.Errorf("fields of OpenAPI type %q cannot be computed by expressions", openAPIType)
}

// program is a compiled, type-checked expression.
type program struct {
	prg  cel.Program
	want *cel.Type
}

// compiler compiles expressions once per Expand call, caching by source text and target type.
type compiler struct {
	env   *cel.Env
	cache map[string]*program
}

func newCompiler() (*compiler, error) {
	env, err := environment()
	if err != nil {
		return nil, err
	}
	return &compiler{env: env, cache: map[string]*program{}}, nil
}

// compile returns the program for src, which must compute a value of openAPIType. The error, if
// any, is an *ExpressionError without Layer and Field, which the caller fills in.
func (c *compiler) compile(src, openAPIType string) (*program, error) {
	key := openAPIType + "\x00" + src
	if p, ok := c.cache[key]; ok {
		return p, nil
	}
	want, err := celTypeOf(openAPIType)
	if err != nil {
		return nil, &ExpressionError{Expression: src, Reason: ExpressionType, Err: err}
	}
	ast, iss := c.env.Compile(src)
	if iss.Err() != nil {
		return nil, &ExpressionError{Expression: src, Reason: ExpressionCompile, Err: errors.New(strings.TrimSpace(iss.Err().Error()))}
	}
	got := ast.OutputType()
	if !got.IsExactType(types.DynType) && !want.IsAssignableType(got) {
		return nil, &ExpressionError{Expression: src, Reason: ExpressionType,
			Err: fmt.Errorf("returns %s, the field needs %s", got, want)}
	}
	prg, err := c.env.Program(ast, cel.CostLimit(ExpressionCostLimit))
	if err != nil {
		return nil, &ExpressionError{Expression: src, Reason: ExpressionCompile, Err: err}
	}
	p := &program{prg: prg, want: want}
	c.cache[key] = p
	return p, nil
}

// eval evaluates p for one instance and returns the value as unstructured JSON (string, int64,
// float64 or bool).
func (p *program) eval(src string, ctx *exprContext) (any, error) {
	out, _, err := p.prg.Eval(ctx.vars)
	if err != nil {
		reason := ExpressionEval
		if strings.Contains(err.Error(), "cost limit exceeded") {
			reason = ExpressionCost
		}
		return nil, &ExpressionError{Expression: src, Instance: ctx.instanceName, Reason: reason, Err: err}
	}
	var v any
	switch p.want {
	case cel.StringType:
		v, _ = out.Value().(string)
	case cel.IntType:
		v, _ = out.Value().(int64)
	case cel.DoubleType:
		v, _ = out.Value().(float64)
	case cel.BoolType:
		v, _ = out.Value().(bool)
	}
	if v == nil {
		return nil, &ExpressionError{Expression: src, Instance: ctx.instanceName, Reason: ExpressionType,
			Err: fmt.Errorf("returned %s, the field needs %s", out.Type().TypeName(), p.want)}
	}
	return v, nil
}
