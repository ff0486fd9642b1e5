package sdk

// Closest is closest, for the tests of its edit distance.
var Closest = closest
