// Package browser tests the hub's web view (/ui) in a real headless
// Chromium. It is a module of its own so that the browser driver
// (chromedp) stays out of meshfed's module graph; `make test` runs it.
package browser
