package metricsauth

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// How long answers are kept: the TTLs of controller-runtime's filter (its delegating authenticator
// and authorizer).
const (
	TokenTTL   = time.Minute
	AllowTTL   = 5 * time.Minute
	DenyTTL    = 30 * time.Second
	reviewWait = 10 * time.Second
	// maxEntries bounds each cache: past it, the cache starts again empty (a flood of distinct bogus
	// tokens costs API calls, never memory).
	maxEntries = 1024
)

// FilterProvider is a metricsserver.Options.FilterProvider: it reviews tokens and access through
// the manager's own REST config and HTTP client (so its requests are counted with the manager's).
func FilterProvider(cfg *rest.Config, httpClient *http.Client) (metricsserver.Filter, error) {
	authn, err := authenticationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authentication client: %w", err)
	}
	authz, err := authorizationclient.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("metrics authorization client: %w", err)
	}
	a := New(authn.TokenReviews(), authz.SubjectAccessReviews())
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return a.Handler(log, next), nil
	}, nil
}

// Authorizer reviews bearer tokens and access with the API server, and caches the answers.
type Authorizer struct {
	tokenReviews  authenticationclient.TokenReviewInterface
	accessReviews authorizationclient.SubjectAccessReviewInterface
	now           func() time.Time

	mu     sync.Mutex
	tokens map[[32]byte]tokenEntry
	access map[string]accessEntry
}

type tokenEntry struct {
	user    *authenticationv1.UserInfo // nil: the token was refused
	expires time.Time
}

type accessEntry struct {
	allowed bool
	reason  string
	expires time.Time
}

// New returns an Authorizer that sends its reviews through these clients.
func New(tokenReviews authenticationclient.TokenReviewInterface, accessReviews authorizationclient.SubjectAccessReviewInterface) *Authorizer {
	return &Authorizer{tokenReviews: tokenReviews, accessReviews: accessReviews, now: time.Now, tokens: map[[32]byte]tokenEntry{}, access: map[string]accessEntry{}}
}

// Handler serves next to requests whose token is accepted and whose user may use the request's
// verb on its path; others get 401 (no token, or one the API server refuses), 403 (not allowed) or
// 500 (the API server could not answer; nothing is cached then).
func (a *Authorizer) Handler(log logr.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		token, ok := bearerToken(req)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), reviewWait)
		defer cancel()
		user, err := a.authenticate(ctx, token)
		if err != nil {
			log.Error(err, "Authentication failed")
			http.Error(w, "Authentication failed", http.StatusInternalServerError)
			return
		}
		if user == nil {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		verb := strings.ToLower(req.Method)
		allowed, reason, err := a.authorize(ctx, user, verb, req.URL.Path)
		if err != nil {
			msg := fmt.Sprintf("Authorization for user %s failed", user.Username)
			log.Error(err, msg)
			http.Error(w, msg, http.StatusInternalServerError)
			return
		}
		if !allowed {
			log.V(4).Info("Authorization denied", "user", user.Username, "verb", verb, "path", req.URL.Path, "reason", reason)
			http.Error(w, fmt.Sprintf("Authorization denied for user %s", user.Username), http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, req)
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>" header.
func bearerToken(req *http.Request) (string, bool) {
	h := strings.TrimSpace(req.Header.Get("Authorization"))
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// authenticate returns the user a token belongs to, or nil if the API server refuses it.
func (a *Authorizer) authenticate(ctx context.Context, token string) (*authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	e, ok := a.tokens[key]
	a.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.user, nil
	}
	tr, err := a.tokenReviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("reviewing a token: %w", err)
	}
	var user *authenticationv1.UserInfo
	if tr.Status.Authenticated {
		user = &tr.Status.User
	}
	a.mu.Lock()
	if len(a.tokens) >= maxEntries {
		clear(a.tokens)
	}
	a.tokens[key] = tokenEntry{user: user, expires: now.Add(TokenTTL)}
	a.mu.Unlock()
	return user, nil
}

// authorize asks whether user may use verb on the non-resource path.
func (a *Authorizer) authorize(ctx context.Context, user *authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	key := accessKey(user, verb, path)
	now := a.now()
	a.mu.Lock()
	e, ok := a.access[key]
	a.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.allowed, e.reason, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := a.accessReviews.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("reviewing access to %s %s: %w", verb, path, err)
	}
	if sar.Status.EvaluationError != "" && !sar.Status.Allowed && !sar.Status.Denied {
		// No authorizer could decide: not cached, so that the next scrape asks again.
		return false, sar.Status.EvaluationError, nil
	}
	ttl := DenyTTL
	if sar.Status.Allowed {
		ttl = AllowTTL
	}
	a.mu.Lock()
	if len(a.access) >= maxEntries {
		clear(a.access)
	}
	a.access[key] = accessEntry{allowed: sar.Status.Allowed, reason: sar.Status.Reason, expires: now.Add(ttl)}
	a.mu.Unlock()
	return sar.Status.Allowed, sar.Status.Reason, nil
}

// accessKey identifies a question to the authorizer: the whole user (name, UID, groups, extra),
// the verb and the path.
func accessKey(user *authenticationv1.UserInfo, verb, path string) string {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s;", len(s), s) }
	field(user.Username)
	field(user.UID)
	for _, g := range user.Groups {
		field("g=" + g)
	}
	keys := make([]string, 0, len(user.Extra))
	for k := range user.Extra {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		field("x=" + k)
		for _, v := range user.Extra[k] {
			field(v)
		}
	}
	field(verb)
	field(path)
	return string(h.Sum(nil))
}
