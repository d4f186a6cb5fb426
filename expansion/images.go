package expansion

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bluesky/tiled-operator/apis/v1alpha1"
)

// Roles of the built-in images: what each runs. They name the images in the OLM bundle's
// relatedImages and, upper-cased, the manager's RELATED_IMAGE_<ROLE> variables.
const (
	ImageTiled      = "tiled"
	ImagePostgreSQL = "postgresql"
	ImageCache      = "cache"
)

// RelatedImagePrefix starts the name of each environment variable that replaces a built-in image
// (OLM's convention for the images a ClusterServiceVersion lists in relatedImages).
const RelatedImagePrefix = "RELATED_IMAGE_"

// BuiltinImage is one image the operator runs by default: every pod it starts runs one of these
// unless a layer names another image.
type BuiltinImage struct {
	// Role says what the image is for (ImageTiled, ImagePostgreSQL, ImageCache).
	Role string
	// Default is the image DefaultBuiltins uses.
	Default string
	// Fields are the profile fields that name another image for what it runs.
	Fields []string
	// Runs says which containers run it.
	Runs string
	// field is where the image sits in the built-in defaults.
	field func(*v1alpha1.InstanceTemplate) *string
}

// Variable is the manager's environment variable that replaces the image: RELATED_IMAGE_<ROLE>.
func (b BuiltinImage) Variable() string {
	return RelatedImagePrefix + strings.ToUpper(b.Role)
}

// builtinImages is the one list of the images the operator runs by default: the built-in defaults
// are filled from it, the OLM bundle's relatedImages are generated from it, and a test renders a
// fully-featured instance and fails on any container whose image it lacks.
var builtinImages = []BuiltinImage{
	{
		Role: ImageTiled, Default: TiledImage, Fields: []string{"spec.tiled.image"},
		Runs:  "the Tiled server, its init container and metrics sidecar, and the upgrade's check and migrate Jobs",
		field: func(t *v1alpha1.InstanceTemplate) *string { return &t.Tiled.Image },
	},
	{
		Role: ImagePostgreSQL, Default: PostgresImage, Fields: []string{"spec.database.managed.image"},
		Runs: "the managed PostgreSQL database and its backup and restore Jobs; for an external database, " +
			"the backup and restore Jobs' pg_dump and psql (no field: only the variable replaces it there)",
		field: func(t *v1alpha1.InstanceTemplate) *string { return &t.Database.Managed.Image },
	},
	{
		Role: ImageCache, Default: CacheImage, Fields: []string{"spec.streaming.managed.image"},
		Runs:  "the managed streaming cache (redis-server and redis-cli)",
		field: func(t *v1alpha1.InstanceTemplate) *string { return &t.Streaming.Managed.Image },
	},
}

// BuiltinImages returns every image the operator runs by default, in a fixed order (a copy).
func BuiltinImages() []BuiltinImage {
	out := slices.Clone(builtinImages)
	for i := range out {
		out[i].Fields = slices.Clone(out[i].Fields)
	}
	return out
}

// Image returns the image b's defaults run for role ("" for an unknown role). For a zero Builtins
// it is the role's compiled-in default.
func (b Builtins) Image(role string) string {
	for _, bi := range builtinImages {
		if bi.Role != role {
			continue
		}
		if b.Defaults.Tiled == nil || b.Defaults.Database == nil || b.Defaults.Database.Managed == nil ||
			b.Defaults.Streaming == nil || b.Defaults.Streaming.Managed == nil {
			return bi.Default
		}
		return *bi.field(&b.Defaults)
	}
	return ""
}

// WithImages returns a copy of b whose defaults run images (role -> image reference) instead of the
// built-in ones, and whose provenance for each replaced field is "default (RELATED_IMAGE_<ROLE>)".
// An image that names the built-in one in another spelling (docker.io/library/postgres:16 for
// postgres:16) replaces nothing, so that the bundle's fully qualified variables leave every
// rendered child as it was. An unknown role or an invalid reference is an error naming the
// variable.
func (b Builtins) WithImages(images map[string]string) (Builtins, error) {
	if len(images) == 0 {
		return b, nil
	}
	out := b
	out.Defaults = *b.Defaults.DeepCopy()
	out.Sources = make(map[string]string, len(b.Sources)+len(images))
	for k, v := range b.Sources {
		out.Sources[k] = v
	}
	for _, role := range sortedKeys(images) {
		image := images[role]
		i := slices.IndexFunc(builtinImages, func(bi BuiltinImage) bool { return bi.Role == role })
		if i < 0 {
			return Builtins{}, fmt.Errorf("%s%s: no built-in image has the role %q (the roles are %s)",
				RelatedImagePrefix, strings.ToUpper(role), role, strings.Join(imageRoles(), ", "))
		}
		bi := builtinImages[i]
		if msg := imageReferenceError(image); msg != "" {
			return Builtins{}, fmt.Errorf("%s=%q %s", bi.Variable(), image, msg)
		}
		field := bi.field(&out.Defaults)
		if FullImageReference(image) == FullImageReference(*field) {
			continue
		}
		*field = image
		for _, f := range bi.Fields {
			out.Sources[f] = SourceDefault + " (" + bi.Variable() + ")"
		}
	}
	return out, nil
}

// ImagesFromEnvironment reads the RELATED_IMAGE_<ROLE> variables of environ (os.Environ's
// KEY=value form) into the role -> image map WithImages takes. A RELATED_IMAGE_ variable of no
// built-in image, or an empty one, is an error naming it: a misspelt variable would otherwise leave
// every instance pulling the built-in image.
func ImagesFromEnvironment(environ []string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, RelatedImagePrefix) {
			continue
		}
		role := strings.ToLower(strings.TrimPrefix(name, RelatedImagePrefix))
		if !slices.Contains(imageRoles(), role) || name != RelatedImagePrefix+strings.ToUpper(role) {
			vars := make([]string, 0, len(builtinImages))
			for _, bi := range builtinImages {
				vars = append(vars, bi.Variable())
			}
			return nil, fmt.Errorf("%s: no built-in image has this variable (they are %s)", name, strings.Join(vars, ", "))
		}
		if value == "" {
			return nil, fmt.Errorf("%s is empty: set it to an image reference, or unset it to run the built-in %s",
				name, builtinImages[slices.Index(imageRoles(), role)].Default)
		}
		out[role] = value
	}
	return out, nil
}

func imageRoles() []string {
	out := make([]string, 0, len(builtinImages))
	for _, bi := range builtinImages {
		out = append(out, bi.Role)
	}
	return out
}

// FullImageReference spells an image reference out in full, as container runtimes read it:
// postgres:16 and docker.io/postgres:16 are docker.io/library/postgres:16, bitnami/postgresql:16 and
// index.docker.io/bitnami/postgresql:16 are docker.io/bitnami/postgresql:16. Mirroring tools match images on their registry.
func FullImageReference(ref string) string {
	first, rest, found := strings.Cut(ref, "/")
	if first == "docker.io" || first == "index.docker.io" {
		if !strings.Contains(rest, "/") {
			return "docker.io/library/" + rest
		}
		return "docker.io/" + rest
	}
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !found {
		return "docker.io/library/" + ref
	}
	return "docker.io/" + first + "/" + rest
}
