// Gossamer: delegation with Trust<T>. Include this one header.
#pragma once

#include <gossamer/errors.hpp>
#include <gossamer/fiber.hpp>
#include <gossamer/latch.hpp>
#include <gossamer/runtime.hpp>
#include <gossamer/trust.hpp>
